"""What the service's answers are made of: the request and response models (:mod:`~labeldist.api.answers.schemas`),
their encoding (:mod:`~labeldist.api.answers.encoding`), and items' labels as JSON
(:mod:`~labeldist.api.answers.itemlabels`) or drawn for display (:mod:`~labeldist.api.answers.labelview`)."""
