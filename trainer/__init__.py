"""The trainer: embeddings trained on minibatches from labeldist stores (``trainer fit``), evaluated on held-out
ones (``trainer eval``), over the clients of :mod:`labeldist.client`. Importing it imports no torch.

- :mod:`~labeldist.trainer.training`: the run, models, recipes, monitor, checkpoints, evaluation and metrics;
- :mod:`~labeldist.trainer.losses`: one loss per module, in the pytorch-metric-learning style;
- :mod:`~labeldist.trainer.inputs`: images and their cache, augmentation, demo input features;
- :mod:`~labeldist.trainer.render`: pictures drawn from pose and layout labels;
- :mod:`~labeldist.trainer.results`: the tables and figures fit, eval and plot show;
- :mod:`~labeldist.trainer.experiments`: the research scripts behind RESULTS.md (reproductions, ceilings), which
  the product never imports, run from the checkout (the wheel does not hold them);
- :mod:`~labeldist.trainer.kinds`: what the trainer knows of each store kind;
- :mod:`~labeldist.trainer.cli`: the ``trainer`` command. docs/training.md is the guide.
"""
