"""The foundation every layer stands on, importing nothing of labeldist but the error root: checked options and
paths (:mod:`~labeldist.core.options`), progress on long jobs (:mod:`~labeldist.core.progress`), the extras and
what a missing one says (:mod:`~labeldist.core.extras`), writing a file whole (:mod:`~labeldist.core.files`), the
top-k kernels (:mod:`~labeldist.core.knn`), the dense limit (:mod:`~labeldist.core.dense`), the thread budget of
a task (:mod:`~labeldist.core.threads`) and where a job's tasks run (:mod:`~labeldist.core.clusters`)."""
