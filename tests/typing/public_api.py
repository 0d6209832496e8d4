"""Read by mypy in `make lint`, never run: the public names are typed, not the Any a lazy `__getattr__` gives.

A wrong keyword must be an error mypy reports: the ignore below is needed, and strict mode's
warn_unused_ignores fails lint the day it is not.
"""

from typing import assert_type

import agent_retrieval
from agent_retrieval.context import Context

agent_retrieval.Retrieval(nonsense=1)  # type: ignore[call-arg]
assert_type(agent_retrieval.Context, type[Context])
