"""The S3 objects of a payload store, under its key prefix, through aioboto3.

temporalio's S3 driver reads and writes payloads through an `S3StorageDriverClient`;
the store needs more of S3 than that (its marker written once and never over another
process's, listing for `payloads gc`, batched deletes), so one client does both, with
every key under the store's prefix. aioboto3 is imported at the first call, so only a
process that uses an s3:// store needs the `s3` extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from temporalio.contrib.aws.s3driver import S3StorageDriverClient


class PrefixedS3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened per operation, under a key prefix, from one session.

    Opening per operation keeps the converter a plain value (no lifespan to close);
    only payloads over the threshold pay for it. The session is made once: a new one
    loads S3's service model again, blocking the event loop for about half a second.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._session: Any = None

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    @contextlib.asynccontextmanager
    async def _s3(self) -> AsyncIterator[Any]:
        import aioboto3

        if self._session is None:
            self._session = aioboto3.Session()
        async with self._session.client("s3") as s3:
            yield s3

    async def _call(self, method: str, **kwargs: Any) -> Any:
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

        async with self._s3() as s3:
            return await getattr(new_aioboto3_client(s3), method)(**kwargs)

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await self._call("put_object", bucket=bucket, key=self._key(key), data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        """Never skip a write: an object's age must be its task's latest write, for lifecycle rules."""
        return False

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await self._call("get_object", bucket=bucket, key=self._key(key))

    def describe(self) -> dict[str, str]:
        return {"prefix": self._prefix} if self._prefix else {}

    def location(self, bucket: str, key: str) -> str:
        return f"s3://{bucket}/{self._key(key)}"

    async def read(self, bucket: str, key: str) -> bytes | None:
        """The object's bytes, or None when the bucket has no such object."""
        async with self._s3() as s3:
            try:
                answer = await s3.get_object(Bucket=bucket, Key=self._key(key))
            except s3.exceptions.NoSuchKey:
                return None
            return await answer["Body"].read()

    async def create(self, bucket: str, key: str, data: bytes) -> None:
        """Write the object unless it exists (a store without conditional writes: last writer wins)."""
        async with self._s3() as s3:
            try:
                await s3.put_object(Bucket=bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
            except s3.exceptions.ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return
                if code not in ("NotImplemented", "501"):
                    raise
                await s3.put_object(Bucket=bucket, Key=self._key(key), Body=data)

    async def any_under(self, bucket: str, under: str, besides: str) -> bool:
        """Whether an object other than `besides` has a key (after the prefix) starting with `under`."""
        async with self._s3() as s3:
            answer = await s3.list_objects_v2(Bucket=bucket, Prefix=self._key(under), MaxKeys=2)
        return any(item["Key"] != self._key(besides) for item in answer.get("Contents", []))

    async def listed(self, bucket: str, under: str) -> list[tuple[str, int, datetime]]:
        """Every object whose key (after the prefix) starts with `under`: that key, size, last write."""
        found = []
        async with self._s3() as s3:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=self._key(under))
            async for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(self._key("")) :]
                    found.append((key, item["Size"], item["LastModified"]))
        return found

    async def delete(self, bucket: str, keys: Sequence[str]) -> None:
        async with self._s3() as s3:
            for start in range(0, len(keys), 1000):  # S3's most per request
                batch = [{"Key": self._key(key)} for key in keys[start : start + 1000]]
                answer = await s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
                if errors := answer.get("Errors"):
                    first = errors[0]
                    raise OSError(f"S3 kept {len(errors)} object(s), e.g. {first['Key']}: {first['Message']}")
