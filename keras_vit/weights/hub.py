"""Files of a Hugging Face Hub repository, through `huggingface_hub`.

`huggingface_hub` is optional (`pip install keras3-vit[hub]`): it is what
timm, transformers and keras-hub download with, so a checkpoint one of them
has already fetched is read from the same cache (`$HF_HOME/hub`, by default
`~/.cache/huggingface/hub`), with the same revision pinning, token and
offline mode (`HF_HUB_OFFLINE=1`). Nothing here is home-made: a file is
`huggingface_hub.hf_hub_download`'s, and its errors are turned into one
`WeightsNotFoundError` that names the repository, the revision, the file and
the cache directory.

Example:

```python
options = HubOptions(revision="main")
path = download("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "config.json",
                options)
```
"""

from __future__ import annotations

import dataclasses
import json
import os

from keras_vit._export import export
from keras_vit.weights.errors import WeightsNotFoundError

# A sharded checkpoint's index (transformers' and timm's name).
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


@export("keras_vit.weights.HubOptions")
@dataclasses.dataclass(frozen=True)
class HubOptions:
    """How files are fetched from the Hub: `hf_hub_download`'s own options.

    Attributes:
        revision: A branch, tag or commit hash; `None` for `"main"`.
        token: A Hub token, `True` for the stored one, `None` for the
            default (the stored one, if any).
        cache_dir: The Hub cache directory; `None` for `huggingface_hub`'s
            (`$HF_HUB_CACHE`, `$HF_HOME/hub`).
        local_files_only: Read the cache only, never the network; `None`
            follows `HF_HUB_OFFLINE`.
        force_download: Download the files again even when cached (a
            truncated or corrupt cached file is then replaced).
    """

    revision: str | None = None
    token: str | bool | None = None
    cache_dir: str | None = None
    local_files_only: bool | None = None
    force_download: bool = False


def hub_module():
    """`huggingface_hub`, or an `ImportError` saying how to install it."""
    try:
        import huggingface_hub
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            "Loading a checkpoint by its Hub name needs huggingface_hub: "
            "`pip install huggingface_hub` (or `pip install keras3-vit[hub]`). "
            "A downloaded file or folder loads without it."
        ) from error
    return huggingface_hub


def cache_location(options: HubOptions) -> str:
    """The Hub cache directory files are read from and written to."""
    if options.cache_dir is not None:
        return os.fspath(options.cache_dir)
    hub_module()
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _offline(options: HubOptions) -> bool:
    if options.local_files_only is not None:
        return bool(options.local_files_only)
    hub_module()
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def download(repo_id: str, filename: str, options: HubOptions, *, missing_ok=False):
    """The local path of one file of a Hub repository: cached or downloaded.

    Args:
        repo_id: E.g. `"timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"`.
        filename: A file of the repository, e.g. `"config.json"`.
        options: `HubOptions`.
        missing_ok: Return `None` when the repository has no such file
            (online), or the cache holds none (offline), instead of raising.

    Raises:
        WeightsNotFoundError: the file is neither cached nor downloadable;
            the message names the repository, revision, file and cache.
        ValueError: `force_download` in offline mode.
    """
    hub = hub_module()
    from huggingface_hub import errors

    if options.force_download and _offline(options):
        raise ValueError(
            f"{repo_id}/{filename}: force_download needs the network, but "
            "offline mode is on (HF_HUB_OFFLINE or local_files_only); the "
            f"cache {cache_location(options)!r} was left as it is."
        )
    try:
        return hub.hf_hub_download(
            repo_id,
            filename,
            revision=options.revision,
            token=options.token,
            cache_dir=options.cache_dir,
            local_files_only=bool(options.local_files_only),
            force_download=bool(options.force_download),
            library_name="keras_vit",
        )
    except errors.LocalEntryNotFoundError as error:
        # Offline (or unreachable): the cache has no such file. Another file
        # of the same repository may still be there (a sharded checkpoint).
        if missing_ok:
            return None
        raise _not_found(repo_id, filename, options, error) from error
    except errors.EntryNotFoundError as error:  # the repository has no such file
        if missing_ok:
            return None
        raise _not_found(repo_id, filename, options, error) from error
    except (ValueError, OSError) as error:  # HTTP, repository, revision errors
        raise _not_found(repo_id, filename, options, error) from error


def _not_found(repo_id, filename, options: HubOptions, error) -> WeightsNotFoundError:
    revision = options.revision or "main"
    reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
    offline = (
        " (offline mode: HF_HUB_OFFLINE or local_files_only)"
        if _offline(options)
        else ""
    )
    return WeightsNotFoundError(
        f"{repo_id}/{filename} at revision {revision!r} is not in the Hub cache "
        f"{cache_location(options)!r}{offline} and could not be downloaded "
        f"({type(error).__name__}: {reason}). Fetch it once online, e.g. "
        f"`huggingface-cli download {repo_id}`, or pass the downloaded folder."
    )


def weight_files(repo_id: str, options: HubOptions) -> tuple[str, ...]:
    """The local paths of a repository's `.safetensors` weights.

    One `model.safetensors`, or the shards a `model.safetensors.index.json`
    lists (its `weight_map`), in order.

    Raises:
        WeightsNotFoundError: neither is cached or downloadable.
    """
    single = download(repo_id, SAFETENSORS, options, missing_ok=True)
    if single is not None:
        return (single,)
    index = download(repo_id, SAFETENSORS_INDEX, options, missing_ok=True)
    if index is None:
        raise _not_found(
            repo_id,
            f"{SAFETENSORS} (or {SAFETENSORS_INDEX})",
            options,
            FileNotFoundError("no safetensors weights"),
        )
    return tuple(download(repo_id, shard, options) for shard in shards_of(index))


def shards_of(index_path: str) -> list[str]:
    """The shard file names of a `model.safetensors.index.json`, in order."""
    with open(index_path, encoding="utf-8") as f:
        weight_map = json.load(f).get("weight_map") or {}
    if not weight_map:
        raise WeightsNotFoundError(f"{index_path!r} lists no shards (no weight_map).")
    return sorted(set(weight_map.values()))
