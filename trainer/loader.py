"""Training steps made in DataLoader worker processes, now :mod:`labeldist.client.loader`; re-exported here for the
trainer's modules (evaluate) and existing imports. ``PASSED_ON`` holds :class:`~labeldist.client.data.InputError`,
the base of the trainer's :class:`~labeldist.trainer.images.ImageInputError`."""

from labeldist.client.loader import PASSED_ON, _Failed, _Requests, request_seed, steps_in_processes, worker_message

__all__ = ["PASSED_ON", "_Failed", "_Requests", "request_seed", "steps_in_processes", "worker_message"]
