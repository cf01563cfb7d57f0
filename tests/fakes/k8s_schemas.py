"""Strict schema checks for Kubernetes objects, offline.

- Core and built-in API groups (Pod, PVC, Job, Role, NetworkPolicy, StorageClass, ...):
  ``kubernetes-validate`` in strict mode (unknown fields are errors) against the
  schemas it ships for :data:`K8S_VERSION`.
- CRDs (VolumeSnapshot, VolumeSnapshotClass, RayCluster): the CRD's own
  ``openAPIV3Schema``, checked in under ``crd_schemas/`` (each file's ``$comment``
  names the upstream repository, tag, commit and path), made strict the way the
  API server's ``fieldValidation=Strict`` is: an object schema with
  ``properties`` and no ``additionalProperties`` or
  ``x-kubernetes-preserve-unknown-fields`` rejects unknown fields. Their
  ``metadata`` (the CRD schema says only ``type: object``) is checked as a strict
  ``ObjectMeta``. Not checked: the CEL rules (``x-kubernetes-validations``),
  except VolumeSnapshot's "exactly one source" rule, re-implemented in
  :func:`_volume_snapshot_rules`.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

K8S_VERSION = "1.36"
"""The API version the manifests target; it matches the kubernetes 36.x client pinned in pyproject."""
CRD_DIR = Path(__file__).parent / "crd_schemas"


class SchemaViolation(AssertionError):
    """An object does not validate against its schema."""


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for path in sorted(CRD_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        schemas[(f"{doc['group']}/{doc['version']}", doc["kind"])] = _strict(doc["schema"])
    return schemas


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate(obj: dict[str, Any]) -> None:
    """Raise :class:`SchemaViolation` unless ``obj`` is a valid object of its ``apiVersion``/``kind``."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in _crd_schemas():
        _validate_crd(obj, _crd_schemas()[key])
        return
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        raise SchemaViolation(f"{key[1]} {_name(obj)}: {path}: {err.message}") from None
    except kubernetes_validate.SchemaNotFoundError as err:
        raise SchemaViolation(err.message) from None


def validate_pod_template(template: dict[str, Any]) -> None:
    """A pod template embedded in a CRD (e.g. RayCluster's), as a strict core ``PodTemplateSpec``."""
    validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "embedded"}, "template": template})


def _validate_crd(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        path = ".".join(str(p) for p in err.path)
        raise SchemaViolation(f"{obj['kind']} {_name(obj)}: {path}: {err.message}")
    shell = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": copy.deepcopy(obj.get("metadata", {}))}
    try:
        validate(shell)  # a ConfigMap is ObjectMeta plus optional fields: its check is the metadata's
    except SchemaViolation as err:
        raise SchemaViolation(f"{obj['kind']} metadata: {err}") from None
    if obj["kind"] == "VolumeSnapshot":
        _volume_snapshot_rules(obj)


def _volume_snapshot_rules(obj: dict[str, Any]) -> None:
    source = obj["spec"]["source"]
    if ("persistentVolumeClaimName" in source) == ("volumeSnapshotContentName" in source):
        raise SchemaViolation(
            f"VolumeSnapshot {_name(obj)}: exactly one of volumeSnapshotContentName and "
            "persistentVolumeClaimName must be set"
        )


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", "<unnamed>"))
