"""The rules of ``transfer port``: one module per rewrite (libcst's one codemod per rewrite is the model).

Each rule claims scan's findings through the `port.Porter` it is given
(``porter.cand`` with the edits, or why it is left; ``porter.note``;
``porter.groups``: candidates rewritten all or none) and has up to four
parts, run by `port.Porter.run` in the order of `ALL`:

* ``before_walk(porter)``: a pass of its own over the file, before the walk;
* ``NODES``: ``{ast type: handler(porter, node)}``, called in ONE walk over
  every node in source order (the rules share it, as batched libcst visitors);
* ``after_walk(porter)``: after the walk (it may replace the walk's candidates);
* ``after_settle(porter)``: after `port.Porter.settle` made every group all or none.

A rule never imports `port` (the edit machinery is `edits`); a test may run
any subset of rules (``port.port_source(..., rules=(strings,))``).
"""

from __future__ import annotations

from . import (aliases, conditionals, cuda_api, cuda_calls, import_fallbacks, native, set_device, strings,
               variables)

#: Every rule, in the order each phase runs them.
ALL = (aliases, native, cuda_api, cuda_calls, strings, variables, import_fallbacks, conditionals, set_device)
