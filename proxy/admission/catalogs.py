"""Which catalog a request's ``{prefix}`` names: shared by the gate, which resolves it, and the
config handler, which answers with it."""

from __future__ import annotations

from proxy.backing.offers import Offer
from proxy.errors import NotFound


class CatalogNames:
    """Which catalog a ``{prefix}`` selects: the documented mapping, else the default catalog
    for no prefix and for the prefix the backing itself advertises; anything else is 404."""

    def __init__(self, default: str, mapping: dict[str, str], lower_case: bool = False) -> None:
        self._default = default
        self._mapping = dict(mapping)
        self.lower_case = lower_case
        """The backing folds names to lower case (``Settings.name_case``)."""

    def resolve(self, prefix: str | None, offer: Offer) -> str:
        if prefix is None:
            return self._default
        if prefix in self._mapping:
            return self._mapping[prefix]
        if prefix == offer.prefix:
            return self._default
        raise NotFound("no such catalog")
