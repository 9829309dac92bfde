#!/usr/bin/env bash
# Run once on the head by `ray up cluster/ray-up.yaml` (head_setup_commands): install Debian's PostgreSQL, make it
# listen on the head's address for the cluster's subnet, and create the role and database that JR2RAY_STORE (in
# ~/.jr2ray/store.env, synced from cluster/store.env) names. Idempotent: a second `ray up` changes nothing.
set -euo pipefail
ENV_FILE="${1:-$HOME/.jr2ray/store.env}"
chmod 600 "$ENV_FILE"
# The URL's parts, parsed by Python, never echoed: the password goes to psql on stdin only.
read -r PG_USER PG_DB PG_PORT < <(python3 - "$ENV_FILE" <<'PY'
import sys, urllib.parse
url = next(l.split("=", 1)[1].strip() for l in open(sys.argv[1]) if l.startswith("JR2RAY_STORE="))
u = urllib.parse.urlsplit(url)
print(u.username, u.path.lstrip("/"), u.port or 5432)
PY
)
PG_PASSWORD="$(python3 - "$ENV_FILE" <<'PY'
import sys, urllib.parse
url = next(l.split("=", 1)[1].strip() for l in open(sys.argv[1]) if l.startswith("JR2RAY_STORE="))
print(urllib.parse.unquote(urllib.parse.urlsplit(url).password or ""))
PY
)"
sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
CONF_DIR="$(ls -d /etc/postgresql/*/main | sort -V | tail -1)"
# Every process that touches the store holds a pool of JR2RAY_STORE_POOL_MIN..MAX connections (1..4 by default):
# the API replicas, the registry, the timer service and every live Run or host actor. Size max_connections for that.
sudo tee "$CONF_DIR/conf.d/jr2ray.conf" >/dev/null <<CONF
listen_addresses = '*'
port = $PG_PORT
max_connections = 500
CONF
if ! sudo grep -q "jr2ray cluster" "$CONF_DIR/pg_hba.conf"; then
  echo "host $PG_DB $PG_USER samenet scram-sha-256  # jr2ray cluster" | sudo tee -a "$CONF_DIR/pg_hba.conf" >/dev/null
fi
sudo systemctl restart postgresql
sudo -u postgres psql -v ON_ERROR_STOP=1 -q -v user="$PG_USER" -v db="$PG_DB" -v pw="$PG_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user')
\gexec
ALTER ROLE :"user" PASSWORD :'pw';
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db')
\gexec
SQL
# jr2ray creates its tables itself (numbered migrations) the first time any process opens the store.
