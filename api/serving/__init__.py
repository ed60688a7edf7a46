"""The stores a service process serves (:mod:`~labeldist.api.serving.registry`), the distances it computes for them
on demand under a budget (:mod:`~labeldist.api.serving.compute`) and caches (:mod:`~labeldist.api.serving.caches`),
and their loads at start-up (:mod:`~labeldist.api.serving.warmup`)."""
