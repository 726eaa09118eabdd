"""Settings of the load scraper (``fleet.load``), a section of ``proxy.config.Settings``.

A module of its own, importing nothing of the proxy, so the settings module can import it
(as it imports ``routing.settings``) while ``fleet.load`` imports the settings module.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]


class LoadSettings(BaseModel):
    """Scraping each replica's own load figures from its ``/metrics`` (``fleet.load``)."""

    model_config = ConfigDict(frozen=True)

    interval_s: Annotated[float, Field(ge=0)] = 0.5  # 0: do not scrape
    timeout_s: PositiveFloat = 1.0
    stale_s: PositiveFloat = 2.0
    kv_high: Annotated[float, Field(gt=0, le=1)] = 0.9
    waiting_high: Annotated[int, Field(ge=1)] = 8  # more than one group's burst
