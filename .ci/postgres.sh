#!/usr/bin/env bash
# Install (Debian packages), start and prepare a local PostgreSQL for the backend-store tests.
# Prints the URI to use as ROOFLINE_TEST_POSTGRES_URI on its last line. Idempotent.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
as_pg() { if [ -z "$SUDO" ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q postgresql >/dev/null
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | grep -q "^$version main"; then
  $SUDO pg_createcluster "$version" main >/dev/null
fi
if ! pg_lsclusters -h | grep -q "^$version main .* online"; then
  $SUDO pg_ctlcluster "$version" main start
fi
for i in $(seq 1 30); do
  as_pg psql -qAtc "select 1" >/dev/null 2>&1 && break
  sleep 1
done
as_pg psql -qAtc "select 1 from pg_roles where rolname='roofline'" | grep -q 1 \
  || as_pg psql -qc "create role roofline login password 'roofline'"
as_pg psql -qAtc "select 1 from pg_database where datname='roofline_test'" | grep -q 1 \
  || as_pg psql -qc "create database roofline_test owner roofline"
echo "postgresql://roofline:roofline@127.0.0.1:5432/roofline_test"
