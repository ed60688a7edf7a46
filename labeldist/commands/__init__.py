"""The command groups of ``labeldist`` beside its main parser (:mod:`labeldist.cli`): :mod:`~labeldist.commands.sts`,
``labeldist sts fit|eval``. A command imports any layer; no layer imports a command."""
