"""Job lanes on a Ray cluster (the ``[ray]`` extra): ``supervisor run FILE --ray ADDRESS``.

Ray places each lane on a node and carries the calls; a node agent (a Ray actor hosting an
embedded Core, :mod:`._agent`) starts and ends the trees there. Imported only when ``--ray``
is used: the base install never imports Ray.
"""

from __future__ import annotations
