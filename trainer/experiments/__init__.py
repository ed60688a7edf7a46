"""The research scripts behind RESULTS.md: the papers' reproductions, the ceiling of rendered test sets, and the
figures and tables of runs. Each is run as ``python -m labeldist.trainer.experiments.<name>``."""
