"""Sentence relevance for the ladder loss (Zhou et al., AAAI 2020): STS-B data, scorers, fine-tuning, cascade."""

from labeldist.sts.cascade import calibrate_cbow_threshold, combine, threshold_for_candidates, threshold_for_share
from labeldist.sts.models import PACKAGED, resolve_model
from labeldist.sts.scorers import BiEncoderScorer, CrossEncoderScorer, transformer_calls
from labeldist.sts.stsb import StsPairs, read_sts

__all__ = [
    "PACKAGED",
    "BiEncoderScorer",
    "CrossEncoderScorer",
    "StsPairs",
    "calibrate_cbow_threshold",
    "combine",
    "read_sts",
    "resolve_model",
    "threshold_for_candidates",
    "threshold_for_share",
    "transformer_calls",
]
