"""The ``trainer`` command's rooms: one module per subcommand (or two that go together), each parser beside its
handler, and what they share (:mod:`labeldist.trainer.commands.options`); :mod:`labeldist.trainer.cli` assembles
them."""
