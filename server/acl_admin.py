"""The ACL admin requests mqadmin sends (updateAclConfig, deleteAccessConfig, clusterAclConfigVersion,
updateGlobalWhiteAddr), as 4.9.8's AdminBrokerProcessor answers them: each change is written back
to the plain_acl.yml with its dataVersion counted up, and takes effect at once. 4.9.8 answers
GET_BROKER_CLUSTER_ACL_CONFIG (getAccessConfigSubCommand) REQUEST_CODE_NOT_SUPPORTED; so does this.
Registered only when ACL is on (behind the ACL check, as in Java, where they need no admin role).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import yaml

from rmqgate.server import acl
from rmqgate.server.remoting import Channel, RequestProcessor, not_supported, server_serialized
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.acl_admin")

GET_BROKER_CLUSTER_ACL_CONFIG = 54
UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
DELETE_ACL_CONFIG_FAILED = 210
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211


class _Missing(Exception):
    pass


def _required(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None:
        raise _Missing(
            f"org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <{name}> is null"
        )
    return value


def _split(text: str | None) -> list[str] | None:
    """UtilAll.split(str, ","): None stays None."""
    if text is None:
        return None
    return [s for s in text.split(",") if s]


def data_version_json(version: dict[str, int]) -> str:
    """DataVersion as fastjson writes it."""
    return json.dumps(
        {"counter": version["counter"], "timestamp": version["timestamp"]}, separators=(",", ":")
    )


class AclAdminProcessor(RequestProcessor):
    codes = (
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        GET_BROKER_CLUSTER_ACL_CONFIG,
    )

    def __init__(self, broker: BrokerController, validator: acl.PlainAccessValidator) -> None:
        self.broker = broker
        self.validator = validator

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        code = request.code
        ext = request.ext_fields or {}
        try:
            if code == RequestCode.UPDATE_AND_CREATE_ACL_CONFIG:
                return self.update_access_config(request, ext)
            if code == RequestCode.DELETE_ACL_CONFIG:
                return self.delete_access_config(request, ext)
            if code == RequestCode.GET_BROKER_CLUSTER_ACL_INFO:
                return self.get_acl_config_version(request)
            if code == RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG:
                return self.update_global_white(request, ext)
        except _Missing as exc:
            return server_serialized(request.response(ResponseCode.SYSTEM_ERROR, str(exc)))
        return not_supported(request)

    # -- the file --
    @property
    def path(self) -> str | None:
        return os.path.abspath(self.validator.path) if self.validator.path else None

    def _read(self) -> dict[str, Any]:
        data = acl.read_yaml(self.validator.path) if self.validator.path else None
        return data if data is not None else {}

    def _write(self, data: dict[str, Any]) -> None:
        """Count the version up (DataVersion.nextVersion), write the file, take it in at once."""
        if self.validator.path is None:
            raise acl.AclError("no ACL file to write (--acl or ROCKETMQ_HOME)")
        old = self.validator.config.data_version
        data["dataVersion"] = [{"counter": old["counter"] + 1, "timestamp": int(time.time() * 1000)}]
        tmp = f"{self.validator.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                yaml.safe_dump(data, f, default_flow_style=False, sort_keys=False, allow_unicode=True)
            os.replace(tmp, self.validator.path)
        except OSError as exc:
            raise acl.AclError(str(exc)) from None
        self.validator.load()

    # -- requests --
    def update_access_config(self, request: RemotingCommand, ext: dict[str, str]) -> RemotingCommand:
        ak = _required(ext, "accessKey")
        conf: dict[str, Any] = {
            "accessKey": ak,
            "secretKey": ext.get("secretKey"),
            "whiteRemoteAddress": ext.get("whiteRemoteAddress"),
            "admin": ext.get("admin", "false").strip().lower() == "true",
            "defaultTopicPerm": ext.get("defaultTopicPerm"),
            "defaultGroupPerm": ext.get("defaultGroupPerm"),
            "topicPerms": _split(ext.get("topicPerms")),
            "groupPerms": _split(ext.get("groupPerms")),
        }
        try:
            acl.build_account(conf)  # checkPlainAccessConfig and the perms' format
            acl.check_resource_perms(conf["topicPerms"])
            acl.check_resource_perms(conf["groupPerms"])
            data = self._read()
            accounts = data.get("accounts")
            if not isinstance(accounts, list):
                accounts = []
            for i, account in enumerate(accounts):
                if isinstance(account, dict) and account.get("accessKey") == ak:
                    del accounts[i]  # Java moves the updated account to the end
                    accounts.append(_merged(account, conf))
                    break
            else:
                accounts.append(_merged({}, conf))
            data["accounts"] = accounts
            self._write(data)
        except acl.AclError as exc:
            log.warning("UPDATE_AND_CREATE_ACL_CONFIG for %s failed: %s", ak, exc)
            return server_serialized(request.response(UPDATE_AND_CREATE_ACL_CONFIG_FAILED, str(exc)))
        log.info("ACL account %s updated", ak)
        return server_serialized(request.response(ResponseCode.SUCCESS))

    def delete_access_config(self, request: RemotingCommand, ext: dict[str, str]) -> RemotingCommand:
        ak = _required(ext, "accessKey")
        done = False
        try:
            if ak and ak in self.validator.config.accounts:
                data = self._read()
                accounts = data.get("accounts")
                if isinstance(accounts, list):
                    kept = [a for a in accounts if not (isinstance(a, dict) and a.get("accessKey") == ak)]
                    if len(kept) != len(accounts):
                        data["accounts"] = kept
                        self._write(data)
                        done = True
        except acl.AclError as exc:
            return server_serialized(request.response(DELETE_ACL_CONFIG_FAILED, str(exc)))
        if not done:
            remark = f"The accesskey[{ak}] corresponding to accessConfig has been deleted failed."
            return server_serialized(request.response(DELETE_ACL_CONFIG_FAILED, remark))
        log.info("ACL account %s deleted", ak)
        return server_serialized(request.response(ResponseCode.SUCCESS))

    def get_acl_config_version(self, request: RemotingCommand) -> RemotingCommand:
        c = self.broker.config
        version = data_version_json(self.validator.config.data_version)
        all_versions = "{}" if self.path is None else "{" + json.dumps(self.path) + ":" + version + "}"
        return request.response(
            ResponseCode.SUCCESS,
            ext_fields={
                "version": version,
                "allAclFileVersion": all_versions,
                "brokerAddr": c.broker_addr,
                "brokerName": c.brokerName,
                "clusterName": c.brokerClusterName,
            },
        )

    def update_global_white(self, request: RemotingCommand, ext: dict[str, str]) -> RemotingCommand:
        addrs = _required(ext, "globalWhiteAddrs")
        path = ext.get("aclFileFullPath")  # mqadmin leaves it out without -p: the default file
        ok = False
        try:
            named = not path or (self.path is not None and os.path.abspath(path) == self.path)
            if named and self.path is not None and os.path.isfile(self.path):
                data = self._read()
                data["globalWhiteRemoteAddresses"] = _split(addrs) or []
                self._write(data)
                ok = True
        except acl.AclError as exc:
            return server_serialized(request.response(UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, str(exc)))
        if not ok:
            remark = f"The globalWhiteAddresses[{addrs}] has been updated failed."
            return server_serialized(request.response(UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, remark))
        return server_serialized(request.response(ResponseCode.SUCCESS))


def _merged(existing: dict[str, Any], conf: dict[str, Any]) -> dict[str, Any]:
    """PlainPermissionManager.createAclAccessConfigMap: what the request gives, over what was there."""
    out = existing
    out["accessKey"] = conf["accessKey"]
    if conf["secretKey"]:
        out["secretKey"] = conf["secretKey"]
    if conf["whiteRemoteAddress"] is not None:
        out["whiteRemoteAddress"] = conf["whiteRemoteAddress"]
    out["admin"] = conf["admin"]
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if conf[key]:
            out[key] = conf[key]
    for key in ("topicPerms", "groupPerms"):
        if conf[key] is not None:
            out[key] = conf[key]
    return out
