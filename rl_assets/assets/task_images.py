"""``task_images``: a container task's image, built once by the hash of its build context, or pulled.

Partitioned as the worlds are (a task world's id names its task). A world of plain files, or a reference
world, has no image and this asset records nothing for it. The tag is the hash of every byte of the build
context (:mod:`rl_assets.containers.images`), so a rerun, a crashed worker's successor or a fork finds the
image and builds nothing: ``image_built_now`` in the materializations counts the builds. A failed build is
this partition's failure (its world run fails and is retried as a world is), never a trial's.
"""

from collections.abc import Iterator

import dagster as dg

from rl_assets.assets.partitions import WORLD
from rl_assets.containers.images import ImageBuildError, TaskImage
from rl_assets.resources.world_store import WorldStoreResource


@dg.asset(
    partitions_def=WORLD,
    code_version="task-image-v1",
    group_name="rl",
    output_required=False,
    description=(
        "A container task's image (environment/Dockerfile built by its context hash, or docker_image pulled): "
        "built once, never by a trial; nothing for a world of plain files."
    ),
)
def task_images(context: dg.AssetExecutionContext, world_store: WorldStoreResource) -> Iterator[dg.MaterializeResult]:
    try:
        image = world_store.ensure_image(context.partition_key)
    except ImageBuildError as err:
        log = dg.MetadataValue.md(f"```\n{err.log_tail}\n```")
        raise dg.Failure(str(err), metadata={"build_log_tail": log}) from None
    if image is None:
        context.log.info(f"{context.partition_key}: no image (a world of plain files runs in the bubblewrap sandbox)")
        return
    yield dg.MaterializeResult(metadata=image_metadata(image), data_version=dg.DataVersion(image.image_id))


def image_metadata(image: TaskImage) -> dict[str, object]:
    """The image as its materialization shows it: built now, or found by its context hash."""
    metadata: dict[str, object] = {
        "image": image.tag,
        "image_id": image.image_id,
        "context_hash": image.context_hash,
        "image_size_mb": round(image.size_bytes / 2**20, 1),
        "image_built_now": image.built,
    }
    if image.sidecars:
        metadata["sidecar_images"] = ", ".join(f"{name}: {sidecar.tag}" for name, sidecar in image.sidecars)
    if image.built:
        metadata["image_build_seconds"] = round(image.seconds, 2)
        metadata["image_build_log_tail"] = dg.MetadataValue.md(f"```\n{image.log_tail}\n```")
    return metadata
