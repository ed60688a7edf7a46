"""Minibatch streams and model inputs, now :mod:`labeldist.client.data`; re-exported here for the trainer's modules
(images, fit, evaluate) and existing imports."""

from labeldist.client.data import FeatureInputs, InputError, Inputs, Minibatch, MinibatchStream, Source

__all__ = ["FeatureInputs", "InputError", "Inputs", "Minibatch", "MinibatchStream", "Source"]
