# Helpers of deploy/build (sourced, not run).

# The host's Debian release codename (bookworm): the base image is that release, so wheels built
# with the host's Python 3.11 fit the image's python3.
host_codename() {
    local codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || { echo "no VERSION_CODENAME in /etc/os-release" >&2; return 1; }
    echo "$codename"
}

# The Debian mirror the host's apt already uses (a URI ending in /debian, never debian-security
# or a third-party repository), read from deb822 *.sources files or one-line sources.list
# entries; the repository names no mirror of its own.
host_debian_mirror() {
    local uri
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
              | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'; \
          cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p')
    uri=$(echo "$uri" | grep -E '^https?://[^ ]*/debian/?$' | head -1)
    [ -n "$uri" ] || { echo "no .../debian URI in the host's apt sources" >&2; return 1; }
    echo "$uri"
}

# The compose command that works here: `docker compose` (v2) or docker-compose (1.29).
compose_cmd() {
    if docker compose version >/dev/null 2>&1; then echo "docker compose"
    elif command -v docker-compose >/dev/null; then echo "docker-compose"
    else echo "neither 'docker compose' nor docker-compose is installed" >&2; return 1
    fi
}

# The folder the compose `certs` service writes the throwaway CA and certificates into
# (bind-mounted): it must exist before `up` (Docker would create it owned by root, and the
# service runs as the image's uid) and belong to that uid; mode 0700, the keys inside are 0600.
ensure_tls_dir() {  # path, uid
    local path="$1" uid="$2"
    mkdir -p "$path"
    chmod 700 "$path"
    if [ "$(id -u)" = 0 ] && [ "$(stat -c %u "$path")" != "$uid" ]; then chown "$uid" "$path"; fi
}

# The admin token (adminTokenFile) and the cluster secret (clusterSecretFile: replication and
# controller peers prove membership with it) every node and controller reads: generated once,
# mode 0600, owned by the image's uid so the containers' non-root user can read it through the bind mount
# (chown needs root; a non-root builder gets an image whose uid is its own).
ensure_admin_token() {  # path, uid
    local path="$1" uid="$2"
    mkdir -p "$(dirname "$path")"
    if [ ! -s "$path" ]; then
        (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$path"; echo >>"$path")
        echo "== generated $path (mode 0600)"
    fi
    chmod 600 "$path"
    if [ "$(id -u)" = 0 ] && [ "$(stat -c %u "$path")" != "$uid" ]; then chown "$uid" "$path"; fi
}

# The nodes' ACL (aclFile, RocketMQ's plain_acl.yml), generated once with random secret keys,
# mode 0600 like the token: `rmq-admin` may do everything (the drills and the docs' commands
# sign as it), `rmq-demo` only publish and subscribe to the topic Demo with the groups g1 and
# DemoGroup; anything else is refused (deny by default). Edit it and the nodes reload it.
ensure_acl_file() {  # path, uid
    local path="$1" uid="$2" admin demo
    mkdir -p "$(dirname "$path")"
    if [ ! -s "$path" ]; then
        admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
        demo=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
        (umask 077; cat >"$path" <<ACL
# Users of the compose cluster's nodes (aclEnable=true): see docs/security.md.
accounts:
  - accessKey: rmq-admin
    secretKey: $admin
    admin: true
  - accessKey: rmq-demo
    secretKey: $demo
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Demo=PUB|SUB]
    groupPerms: [g1=SUB, DemoGroup=SUB]
ACL
        )
        echo "== generated $path (mode 0600)"
    fi
    chmod 600 "$path"
    if [ "$(id -u)" = 0 ] && [ "$(stat -c %u "$path")" != "$uid" ]; then chown "$uid" "$path"; fi
}
