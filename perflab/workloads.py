"""The public face of the workload contract: ``from perflab.workloads import Workload``.

The module lives on the instruments floor (:mod:`perflab.instruments.workloads`); this name
is the same module object, so a user's code, a ``perflab.workloads:mlp`` target and the
package's own code all see one registry and one ``Workload`` class.
"""

import sys

from perflab.instruments import workloads as _workloads

sys.modules[__name__] = _workloads
