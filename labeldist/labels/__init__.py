"""Label types and label readers: one module per kind of label (a :class:`LabelSet` each) and per file format.

Named here and imported on first use:

- label sets: :class:`Poses`, :class:`Vectors`, :class:`LayoutMaps`, :class:`CaptionSets`, :class:`Sentences`;
- readers: :func:`read_poses` (MPII CSV, any pose CSV, COCO keypoints JSON), :func:`read_mpii_csv`,
  :func:`read_coco_keypoints`, :func:`read_vectors` (.npy, .csv, .parquet), :func:`vectors_from_array`,
  :func:`read_captions` (COCO or Karpathy captions JSON), :func:`read_sentences`, :func:`read_layout_maps`,
  :func:`generate_layouts` (LSUN room layouts drawn from the eleven types).

``labeldist.read_labels(kind, path, **options)`` reads a file as ``labeldist precompute`` does, with the kind's
options.

>>> from labeldist.labels import vectors_from_array
>>> len(vectors_from_array([[0.0, 1.0], [2.0, 3.0]]))
2
"""

import lazy_loader

from labeldist.labels.base import LabelError, LabelSet

__getattr__, _lazy_dir, _names = lazy_loader.attach(
    __name__,
    submod_attrs={
        "poses": ["Poses"],
        "vectors": ["Vectors", "read_vectors", "vectors_from_array"],
        "layouts": ["LayoutMaps", "read_layout_maps"],
        "captions": ["CaptionSets", "read_captions"],
        "sentences": ["Sentences", "read_sentences"],
        "pose_files": ["read_poses", "read_mpii_csv", "read_coco_keypoints"],
        "lsun_rooms": ["generate_layouts"],
    },
)
__all__ = ["LabelError", "LabelSet", *_names]


def __dir__() -> list[str]:
    return list(__all__)
