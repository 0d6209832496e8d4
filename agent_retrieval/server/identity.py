"""Whose rows a signed-in user reads: the tenant named by their verified token's claims."""

from __future__ import annotations

from typing import Any

USER_NAMESPACE = "user:"  # a user without a tenant reads "user:<id>", which no tenant name can equal


def tenant_of_claims(claims: dict[str, Any]) -> str | None:
    """app_metadata.tenant_id (which only the project's admins can set), else the user's own namespace;
    None for a tenant claim that is empty or inside the user namespace: the database then lets such a caller
    read public rows only, and the LangGraph auth handler refuses it."""
    app_metadata = claims.get("app_metadata")
    if isinstance(app_metadata, dict) and "tenant_id" in app_metadata:
        tenant = app_metadata["tenant_id"]
        valid = isinstance(tenant, str) and tenant and not tenant.startswith(USER_NAMESPACE)
        return tenant if valid else None
    sub = claims.get("sub")
    return f"{USER_NAMESPACE}{sub}" if isinstance(sub, str) and sub else None
