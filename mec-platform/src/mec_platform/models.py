"""Mp1 data models (ETSI GS MEC 011 v2.1.1), with the spec's names on the wire.

Fields are snake_case in Python and camelCase in JSON (``alias_generator``). Inputs are
validated with messages that name the offending field; unknown fields are ignored, as
the spec's schemas allow them.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from mec_common.rest_policy import JsonObject

UInt32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
NonEmpty = Annotated[str, Field(min_length=1, max_length=256)]


def timestamp(seconds: float) -> dict[str, int]:
    """An ETSI TimeStamp {seconds, nanoSeconds} of a Unix time."""
    ns = int(seconds * 1e9)
    return {"seconds": ns // 1_000_000_000, "nanoSeconds": ns % 1_000_000_000}


class Mp1Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=True
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ServiceState(StrEnum):
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"


class Serializer(StrEnum):
    JSON = "JSON"
    XML = "XML"
    PROTOBUF3 = "PROTOBUF3"


class Locality(StrEnum):
    MEC_SYSTEM = "MEC_SYSTEM"
    MEC_HOST = "MEC_HOST"
    NFVI_POP = "NFVI_POP"
    ZONE = "ZONE"
    ZONE_GROUP = "ZONE_GROUP"
    NFVI_NODE = "NFVI_NODE"


class TransportType(StrEnum):
    REST_HTTP = "REST_HTTP"
    MB_TOPIC_BASED = "MB_TOPIC_BASED"
    MB_ROUTING = "MB_ROUTING"
    MB_PUBSUB = "MB_PUBSUB"
    RPC = "RPC"
    RPC_STREAMING = "RPC_STREAMING"
    WEBSOCKET = "WEBSOCKET"


class CategoryRef(Mp1Model):
    href: NonEmpty
    id: NonEmpty
    name: NonEmpty
    version: NonEmpty


class Address(Mp1Model):
    host: NonEmpty
    port: Annotated[int, Field(ge=0, le=65535)]


class EndPointInfo(Mp1Model):
    """Exactly one of ``uris``, ``fqdn`` (MEC 011 v3.1.1), ``addresses``, ``alternative``."""

    uris: list[NonEmpty] | None = None
    fqdn: list[NonEmpty] | None = None
    addresses: list[Address] | None = None
    alternative: JsonObject | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> EndPointInfo:
        kinds = ("uris", "fqdn", "addresses", "alternative")
        if sum(getattr(self, k) is not None for k in kinds) != 1:
            raise ValueError("endpoint needs exactly one of uris, fqdn, addresses or alternative")
        return self


class OAuth2Info(Mp1Model):
    grant_types: Annotated[list[str], Field(min_length=1)]
    token_endpoint: NonEmpty


class SecurityInfo(Mp1Model):
    o_auth2_info: OAuth2Info | None = Field(None, alias="oAuth2Info")


class TransportInfo(Mp1Model):
    id: NonEmpty
    name: NonEmpty
    description: str | None = None
    type: TransportType
    protocol: NonEmpty
    version: NonEmpty
    endpoint: EndPointInfo
    security: SecurityInfo
    impl_specific_info: JsonObject | None = None


class ServiceInfoBase(Mp1Model):
    ser_instance_id: str | None = None
    ser_name: NonEmpty
    ser_category: CategoryRef | None = None
    version: NonEmpty
    state: ServiceState
    serializer: Serializer
    scope_of_locality: Locality | None = None
    consumed_local_only: bool | None = None
    is_local: bool | None = None
    liveness_interval: UInt32 | None = Field(
        None, description="seconds between heartbeats (MEC 011 v2.2 liveness; extension here)"
    )


class ServiceInfoPost(ServiceInfoBase):
    transport_id: str | None = None
    transport_info: TransportInfo | None = None

    @model_validator(mode="after")
    def _post_rules(self) -> ServiceInfoPost:
        if self.ser_instance_id is not None:
            raise ValueError("serInstanceId must not be present: the platform assigns it")
        if (self.transport_id is None) == (self.transport_info is None):
            raise ValueError("either transportId or transportInfo but not both shall be present")
        return self


class ServiceInfo(ServiceInfoBase):
    transport_info: TransportInfo


class FilteringCriteria(Mp1Model):
    ser_instance_ids: list[str] | None = None
    ser_names: list[str] | None = None
    ser_categories: list[CategoryRef] | None = None
    states: list[ServiceState] | None = None
    is_local: bool | None = None

    def matches(self, service: dict[str, Any]) -> bool:
        if self.ser_instance_ids and service.get("serInstanceId") not in self.ser_instance_ids:
            return False
        if self.ser_names and service.get("serName") not in self.ser_names:
            return False
        if self.ser_categories:
            category_id = (service.get("serCategory") or {}).get("id")
            if category_id not in {c.id for c in self.ser_categories}:
                return False
        if self.states and service.get("state") not in self.states:
            return False
        return not (self.is_local is not None and service.get("isLocal", True) != self.is_local)


class WebsockNotifConfig(Mp1Model):
    """MEC 009 clause 6.12a websocket delivery (an extension of Mp1: MEC 011 v3.1.1 defines
    it for no subscription). The platform allocates ``websocketUri``; one sent back (a
    client echoing what it was given) is replaced by the platform's own."""

    websocket_uri: str | None = None
    request_websocket_uri: bool | None = None


class NotificationChannel(Mp1Model):
    """Where a subscription's notifications go: ``callbackReference``, or a websocket the
    platform allocates (``websockNotifConfig.requestWebsocketUri`` true). Given both, the
    platform chooses the websocket and returns only it (MEC 009 clause 6.12a)."""

    callback_reference: NonEmpty | None = None
    websock_notif_config: WebsockNotifConfig | None = None

    @model_validator(mode="after")
    def _one_channel(self) -> NotificationChannel:
        config = self.websock_notif_config
        if config is not None and config.request_websocket_uri is not True:
            raise ValueError('websockNotifConfig: set "requestWebsocketUri": true to ask for a '
                             "websocket (the platform allocates the websocketUri)")  # fmt: skip
        if config is None and self.callback_reference is None:
            raise ValueError("callbackReference: Field required (or ask for a websocket: "
                             '"websockNotifConfig": {"requestWebsocketUri": true})')  # fmt: skip
        if config is not None:
            self.callback_reference = None
            self.websock_notif_config = WebsockNotifConfig(request_websocket_uri=True)
        return self

    @property
    def websocket(self) -> bool:
        return self.websock_notif_config is not None


class SerAvailabilitySubscription(NotificationChannel):
    subscription_type: NonEmpty
    filtering_criteria: FilteringCriteria | None = None


class AppTerminationSubscription(NotificationChannel):
    subscription_type: NonEmpty
    app_instance_id: NonEmpty


class AppReadyConfirmation(Mp1Model):
    indication: Annotated[str, Field(pattern="^READY$")]


class AppTerminationConfirmation(Mp1Model):
    operation_action: Annotated[str, Field(pattern="^(STOPPING|TERMINATING)$")]


def _port(value: str) -> str:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError(f"{value!r} is not a port number (1-65535)")
    return value


def _network(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR prefix") from None
    return value


Port = Annotated[str, AfterValidator(_port)]
Network = Annotated[str, AfterValidator(_network)]


# Addresses and ports are checked in the model, so a rule is valid before anything stores it.
class TrafficFilter(Mp1Model):
    src_address: list[Network] | None = None
    dst_address: list[Network] | None = None
    src_port: list[Port] | None = None
    dst_port: list[Port] | None = None
    protocol: list[str] | None = None
    token: list[str] | None = None
    src_tunnel_address: list[Network] | None = None
    tgt_tunnel_address: list[Network] | None = None
    src_tunnel_port: list[Port] | None = None
    dst_tunnel_port: list[Port] | None = None
    q_ci: UInt32 | None = Field(None, alias="qCI")
    d_scp: UInt32 | None = Field(None, alias="dSCP")
    t_c: UInt32 | None = Field(None, alias="tC")


class TunnelInfo(Mp1Model):
    tunnel_type: Annotated[str, Field(pattern="^(GTP_U|GRE)$")]
    tunnel_dst_address: str | None = None
    tunnel_src_address: str | None = None


class DestinationInterface(Mp1Model):
    interface_type: Annotated[str, Field(pattern="^(TUNNEL|MAC|IP)$")]
    tunnel_info: TunnelInfo | None = None
    src_mac_address: str | None = None
    dst_mac_address: str | None = None
    dst_ip_address: str | None = None
    dst_port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="extension: port of the app's transparent proxy (TPROXY target)"
    )


class TrafficRule(Mp1Model):
    traffic_rule_id: NonEmpty
    filter_type: Annotated[str, Field(pattern="^(FLOW|PACKET)$")]
    priority: UInt32
    traffic_filter: list[TrafficFilter]
    action: Annotated[
        str,
        Field(
            pattern="^(DROP|FORWARD_DECAPSULATED|FORWARD_ENCAPSULATED|PASSTHROUGH"
            "|DUPLICATE_DECAPSULATED|DUPLICATE_ENCAPSULATED)$"
        ),
    ]
    dst_interface: DestinationInterface | None = None
    state: ServiceState = ServiceState.ACTIVE


class DnsRule(Mp1Model):
    dns_rule_id: NonEmpty
    domain_name: NonEmpty
    ip_address_type: Annotated[str, Field(pattern="^(IP_V4|IP_V6)$")]
    ip_address: NonEmpty
    ttl: UInt32 | None = None
    state: ServiceState = ServiceState.ACTIVE


class AppInfo(Mp1Model):
    """A MEC app instance's registration (MEC 011 v3.1.1, 7.1.2.6). The v3.1.1 file wraps
    the body in ``{"AppInfo": ...}``; that form is accepted too, and answers are bare."""

    app_name: NonEmpty
    app_provider: NonEmpty | None = None
    app_category: CategoryRef | None = None
    app_d_id: NonEmpty | None = Field(None, alias="appDId")
    app_instance_id: NonEmpty | None = None
    endpoint: EndPointInfo | None = None
    app_service_required: list[JsonObject] | None = None
    app_service_optional: list[JsonObject] | None = None
    app_feature_required: list[JsonObject] | None = None
    app_feature_optional: list[JsonObject] | None = None
    is_ins_by_mec: bool = False  # "Default to FALSE if absent"
    app_profile: JsonObject | None = None

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        if isinstance(data, dict) and list(data) == ["AppInfo"]:
            return data["AppInfo"]
        return data
