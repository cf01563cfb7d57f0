"""Harbor-format tasks: a task directory read, validated and described, free of any orchestration.

A task is what Harbor (harbor-framework/harbor) defines: ``instruction.md``, ``task.toml``,
``environment/``, ``tests/test.sh`` and optionally ``solution/solve.sh``. :mod:`.config` is a typed
model of ``task.toml``'s whole schema, so a real Harbor task loads and a typo is refused rather than
silently ignored; :mod:`.task` reads a directory into a :class:`~rl_assets.tasks.task.Task`;
:mod:`.locality` says what of a task this machine's sandbox cannot honour. Like the domain, this
package imports nothing but pydantic and the standard library.
"""
