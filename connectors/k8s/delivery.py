"""Moved: the bounded delivery every connector shares is :mod:`connectors.delivery`.

Kept as an alias so existing imports (``connectors.k8s.delivery.BoundedDelivery``)
keep working.
"""

from __future__ import annotations

from connectors.delivery import BoundedDelivery

__all__ = ["BoundedDelivery"]
