"""A storage driver that wraps another: what every wrapper of ours delegates unchanged.

The payload store is one driver (a folder, S3) under wrappers that each change one
thing (lost payloads as a stand-in, leg inputs by reference). Each names what it wraps as
`driver`, so the store under them all can be found (`innermost`).
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)


class WrappedDriver(StorageDriver):
    """`driver` under another name for nothing: its name, type, stores and reads."""

    def __init__(self, driver: StorageDriver) -> None:
        self._driver = driver

    @property
    def driver(self) -> StorageDriver:
        return self._driver

    def name(self) -> str:
        return self._driver.name()

    def type(self) -> str:
        return self._driver.type()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await self._driver.store(context, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await self._driver.retrieve(context, claims)


def innermost(driver: StorageDriver) -> StorageDriver:
    """The store under the wrappers of `driver`."""
    while isinstance(driver, WrappedDriver):
        driver = driver.driver
    return driver
