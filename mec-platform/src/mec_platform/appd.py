"""Application descriptors (AppD, MEC 010-2 style) in YAML or JSON, validated.

The AppD carries the MEC 010-2 fields the platform uses, plus ``deployment``: how each
backend starts the app (a command for ``process``, an image for ``docker``, a chart for
``helm``). Validation errors name the field: ``appTrafficRule.0.priority: ...``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from mec_common.rest_policy import JsonObject
from mec_platform.models import CategoryRef, DnsRule, TrafficRule

PLATFORM_PREFIX = "PLATFORM_"  # the platform's own settings: never passed to an app

Name = Annotated[str, Field(min_length=1, max_length=128)]


class AppdModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", coerce_numbers_to_str=True
    )


class VirtualCpu(AppdModel):
    num_virtual_cpu: Annotated[float, Field(gt=0, le=256)] = 1


class VirtualMemory(AppdModel):
    virtual_mem_size: Annotated[int, Field(gt=0, description="MiB")] = 256


class VirtualCompute(AppdModel):
    virtual_cpu: VirtualCpu = VirtualCpu()
    virtual_memory: VirtualMemory = VirtualMemory()


class SwImage(AppdModel):
    container_image: str | None = None


class ServiceDependency(AppdModel):
    ser_name: Name
    version: Name
    ser_category: CategoryRef | None = None
    ser_transport_dependencies: list[JsonObject] | None = None
    requested_permissions: list[Any] | None = None


class ServiceDescriptor(AppdModel):
    ser_name: Name
    version: Name
    ser_category: CategoryRef | None = None
    transports_supported: list[JsonObject] | None = None


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class ProcessDeployment(AppdModel):
    command: Annotated[list[str], Field(min_length=1)]
    env: dict[EnvName, str] = {}
    env_prefix: str | None = Field(
        None, description="also pass PLATFORM_URL etc. as <prefix>PLATFORM_URL (e.g. PEP_)"
    )
    inherit_env: list[str] = Field(
        [],
        description="variables of the platform's environment the app receives, by name or "
        "PREFIX* (the operator's settings for this app, e.g. RNIS_*); never PLATFORM_*",
    )

    @field_validator("inherit_env")
    @classmethod
    def _never_the_platforms(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            stem = pattern.removesuffix("*")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", stem):
                raise ValueError(f"{pattern!r} is not a variable name or NAME_PREFIX*")
            if stem.startswith(PLATFORM_PREFIX) or (
                pattern.endswith("*") and PLATFORM_PREFIX.startswith(stem)
            ):
                raise ValueError(f"{pattern!r} would pass the platform's own settings")
        return patterns


class DockerDeployment(AppdModel):
    image: str | None = None
    entrypoint: list[str] | None = None
    command: list[str] | None = None
    env: dict[str, str] = {}
    env_prefix: str | None = None


class HelmDeployment(AppdModel):
    chart: Name
    values: JsonObject = {}
    env_prefix: str | None = None


class Deployment(AppdModel):
    process: ProcessDeployment | None = None
    docker: DockerDeployment | None = None
    helm: HelmDeployment | None = None


class TerminateConfig(AppdModel):
    min_graceful_termination_timeout: Annotated[int, Field(ge=0)] = 0
    max_recommended_graceful_termination_timeout: Annotated[int, Field(ge=0)] | None = None


class AppD(AppdModel):
    app_d_id: Name = Field(alias="appDId")
    app_name: Name
    app_provider: Name
    app_soft_version: Name
    app_d_version: Name = Field(alias="appDVersion")
    mec_version: list[str] = ["2.1.1"]
    app_description: str = ""
    virtual_compute_descriptor: VirtualCompute = VirtualCompute()
    sw_image_descriptor: SwImage = SwImage()
    app_service_required: list[ServiceDependency] = []
    app_service_optional: list[ServiceDependency] = []
    app_service_produced: list[ServiceDescriptor] = []
    app_traffic_rule: list[TrafficRule] = []
    app_d_n_s_rule: list[DnsRule] = Field([], alias="appDNSRule")
    terminate_app_instance_op_config: TerminateConfig = TerminateConfig()
    deployment: Deployment = Deployment()

    @model_validator(mode="after")
    def _consistent(self) -> AppD:
        for rules, key in ((self.app_traffic_rule, "trafficRuleId"),
                           (self.app_d_n_s_rule, "dnsRuleId")):  # fmt: skip
            ids = [r.dump()[key] for r in rules]
            if len(ids) != len(set(ids)):
                raise ValueError(f"{key} values must be unique within the AppD")
        docker = self.deployment.docker
        if docker and not (docker.image or self.sw_image_descriptor.container_image):
            raise ValueError("deployment.docker needs an image (or swImageDescriptor."
                             "containerImage)")  # fmt: skip
        return self

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class AppdError(ValueError):
    """An AppD that cannot be onboarded; the message says every problem found."""


MAX_NODES = 20_000
"""Largest AppD as a tree, aliases expanded (a real one has a few hundred nodes)."""


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses what could blow up: a document whose tree, with every
    alias expanded, exceeds ``MAX_NODES`` (a 421-byte "billion laughs" expands to 44 MiB),
    and duplicate mapping keys (one meaning per document)."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None
    _check_tree(node)
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_tree(root: yaml.Node) -> None:
    """Counts the expanded tree in time linear in the distinct nodes (sizes memoized)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = MAX_NODES + 1  # a node inside itself (recursive alias): too big
        total = 1
        if isinstance(node, yaml.MappingNode):
            keys = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys:
                        raise AppdError(f"duplicate key {key.value!r} ({key.start_mark})")
                    keys.add(key.value)
                total += size(key) + size(value)
                if total > MAX_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item)
                if total > MAX_NODES:
                    break
        sizes[id(node)] = total
        return total

    if size(root) > MAX_NODES:
        raise AppdError(f"the AppD expands to more than {MAX_NODES} nodes (aliases expanded)")


def parse_appd(raw: bytes) -> tuple[AppD, str]:
    """Parse YAML or JSON bytes into a validated AppD and its sha256 checksum."""
    try:
        data = load_yaml(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise AppdError(f"the AppD is neither valid YAML nor JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AppdError("the AppD must be a mapping (YAML) or an object (JSON)")
    try:
        appd = AppD.model_validate(data)
    except ValidationError as exc:
        raise AppdError("; ".join(_describe(e) for e in exc.errors())) from None
    checksum = hashlib.sha256(orjson.dumps(appd.dump(), option=orjson.OPT_SORT_KEYS)).hexdigest()
    return appd, checksum


def _describe(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "AppD"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}"
