"""Label distances: one module per distance, each a small kernel on blocks of labels, with its formula, its paper
and a slow reference (:class:`LabelDistance`).

The built-in kinds' distances, named here and imported on first use (a pose store does not load torch):

- :class:`PoseDistance`: the thin-slicing pose distance (Kim et al., CVPR 2019);
- :class:`VectorDistance`: a SciPy metric between vectors;
- :class:`LayoutMIoU`: 1 - mIoU of room layouts (Kim et al., CVPR 2019);
- :class:`CaptionSetWMD`: caption sets under the word mover's distance (Kusner et al., ICML 2015);
- :class:`SentenceRelevance`: sentence relevance by CBoW and BERT on STS-B, coarse to fine (Zhou et al., AAAI 2020).

>>> from labeldist.distances import VectorDistance
>>> VectorDistance("cityblock").kind
'vectors'
"""

import lazy_loader

from labeldist.distances.base import LabelDistance

__getattr__, _lazy_dir, _names = lazy_loader.attach(
    __name__,
    submod_attrs={
        "pose": ["PoseDistance"],
        "vectors": ["VectorDistance"],
        "layout": ["LayoutMIoU"],
        "caption_sets": ["CaptionSetWMD"],
        "sts": ["SentenceRelevance"],
    },
)
__all__ = ["LabelDistance", *_names]


def __dir__() -> list[str]:
    return list(__all__)
