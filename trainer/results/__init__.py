"""What ``trainer fit``, ``trainer eval`` and ``trainer plot`` show of runs: the tables they end with
(:mod:`~labeldist.trainer.results.report`) and the figures of evaluations and loss curves
(:mod:`~labeldist.trainer.results.plots`). Product code: the research scripts of ``experiments/`` use them, never
the other way round."""
