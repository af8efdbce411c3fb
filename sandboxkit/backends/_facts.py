"""What the built-in remote backends read from the environment, named once.

Each backend reads these, and its registry entry (:data:`sandboxkit.registry.BUILTIN_BACKENDS`)
declares them, which is what ``sandboxkit doctor`` reports from. This module imports nothing,
so the registry can name them without importing a backend or its SDK.
"""

from __future__ import annotations

DAYTONA_KEY_VAR = "DAYTONA_API_KEY"
DAYTONA_URL_VAR = "DAYTONA_API_URL"
DAYTONA_DEFAULT_URL = "https://app.daytona.io/api"
DAYTONA_TARGET_VAR = "DAYTONA_TARGET"
"""The region sandboxes are created in (the SDK's own default when unset)."""

AVIATO_KEY_VARS = ("CWSANDBOX_API_KEY", "AVIATO_API_KEY")
"""In the order read: the second is the name from before the rename, which the client ignores."""
AVIATO_URL_VAR = "CWSANDBOX_BASE_URL"
AVIATO_DEFAULT_URL = "https://api.cwsandbox.com"
"""The ``cwsandbox`` client's own default (``SandboxDefaults().base_url``)."""

RAY_ADDRESS_VAR = "RAY_ADDRESS"
"""The Ray cluster to use (Ray's own variable): ``host:port`` of its head or ``ray://host:port``."""
RAY_DEFAULT_ADDRESS = "auto"
"""What Ray finds without an address: a cluster running on this machine (then, for ``create``,
a local one started on demand)."""

MODAL_KEY_VARS = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")
"""Both are needed: a token is an id and a secret (the client's own variables)."""
MODAL_URL_VAR = "MODAL_SERVER_URL"
MODAL_DEFAULT_URL = "https://api.modal.com"
"""The ``modal`` client's own default (``modal.config``'s ``server_url``)."""
E2B_KEY_VAR = "E2B_API_KEY"
E2B_URL_VAR = "E2B_API_URL"
E2B_DEFAULT_URL = "https://api.e2b.app"
"""The SDK's own default: ``https://api.<E2B_DOMAIN>``, the domain being ``e2b.app``."""
E2B_SANDBOX_URL_VAR = "E2B_SANDBOX_URL"
"""Where every sandbox's ``envd`` is reached (the SDK's variable; unset: a host per sandbox
under the sandbox's domain)."""
DOCKER_HOST_VAR = "DOCKER_HOST"
"""The Engine to use (the Docker SDK's own variable)."""
DOCKER_DEFAULT_HOST = "unix:///var/run/docker.sock"
