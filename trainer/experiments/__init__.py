"""The research scripts behind RESULTS.md: the papers' reproductions and the ceiling of rendered test sets. Each is
run as ``python -m labeldist.trainer.experiments.<name>``; they use the product (the tables and figures of
:mod:`labeldist.trainer.results`), which never imports them."""
