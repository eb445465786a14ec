"""Payload stores a test damages: a folder or a bucket on the session's moto S3 server.

Each lists the payload keys it holds (never the store's marker), damages one (deletes,
truncates or alters it), writes or removes one, or takes the whole store away and hands back what
puts it back, so the fault tests do the same harm to either kind.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from fastmcp_temporal.connection._store_marker import MARKER_NAME


class Store(Protocol):
    """A store the fault tests harm, and its `payload_store` setting."""

    setting: str

    def keys(self) -> set[str]: ...
    def damage(self, key: str, how: str) -> None: ...
    def take_away(self) -> Callable[[], None]: ...
    def put(self, name: str, data: bytes) -> None: ...
    def remove(self, name: str) -> None: ...


class FolderStore:
    """A folder store: its keys are the paths of its files."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.setting = folder, str(folder)

    def keys(self) -> set[str]:
        files = (path for path in self.folder.rglob("*") if path.is_file())
        return {str(path) for path in files if not path.name.startswith(".")}

    def take_away(self) -> Callable[[], None]:
        """Unmount it: the mount point stays, an empty folder (0700); returns what mounts it back."""
        away = self.folder.rename(self.folder.with_name("unmounted"))
        self.folder.mkdir(mode=0o700)

        def mount() -> None:
            shutil.rmtree(self.folder)
            away.rename(self.folder)

        return mount

    def put(self, name: str, data: bytes) -> None:
        """Write `data` as the store's `name` (relative to the store, as an S3 key is to the prefix)."""
        (self.folder / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.folder / name).write_bytes(data)

    def remove(self, name: str) -> None:
        """Delete the store's `name` (relative to the store)."""
        (self.folder / name).unlink()

    def damage(self, key: str, how: str) -> None:
        path = Path(key)
        data = path.read_bytes()
        if how == "delete":
            path.unlink()
        else:
            path.write_bytes(_damaged(data, how))


class S3Store:
    """The `faults` bucket (created here) under the `tasks` prefix: its keys are the objects' keys."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.s3 = boto3.client("s3", endpoint_url=endpoint)
        self.s3.create_bucket(Bucket="faults")
        self.setting = "s3://faults/tasks"

    def keys(self) -> set[str]:
        """Every payload's key: not the store's marker."""
        return {key for key in self._all_keys() if not key.endswith(MARKER_NAME)}

    def _all_keys(self) -> set[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket="faults")
        return {item["Key"] for page in pages for item in page.get("Contents", [])}

    def take_away(self) -> Callable[[], None]:
        """Empty the bucket (a store replaced, an endpoint pointed elsewhere); returns what puts it back."""
        kept = {key: self.s3.get_object(Bucket="faults", Key=key)["Body"].read() for key in self._all_keys()}
        self._empty()

        def put_back() -> None:
            self._empty()
            for key, data in kept.items():
                self.s3.put_object(Bucket="faults", Key=key, Body=data)

        return put_back

    def _empty(self) -> None:
        for key in self._all_keys():
            self.s3.delete_object(Bucket="faults", Key=key)

    def put(self, name: str, data: bytes) -> None:
        self.s3.put_object(Bucket="faults", Key=f"tasks/{name}", Body=data)

    def remove(self, name: str) -> None:
        self.s3.delete_object(Bucket="faults", Key=f"tasks/{name}")

    def damage(self, key: str, how: str) -> None:
        data = self.s3.get_object(Bucket="faults", Key=key)["Body"].read()
        if how == "delete":
            self.s3.delete_object(Bucket="faults", Key=key)
            return
        self.s3.put_object(Bucket="faults", Key=key, Body=_damaged(data, how))


def _damaged(data: bytes, how: str) -> bytes:
    """`data` cut in half ("truncate") or with its last bit flipped (any other harm but "delete")."""
    return data[: len(data) // 2] if how == "truncate" else data[:-1] + bytes([data[-1] ^ 1])
