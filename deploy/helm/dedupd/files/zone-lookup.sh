# The zone lookup of a replicated release (values: zone.source node): the
# init container "zone" of every dedupd pod, run by /bin/sh in an image with
# kubectl (zone.lookup.image). It writes the zone of the Kubernetes node
# the pod runs on, the value of that node's label $ZONE_LABEL, to
# $ZONE_FILE, where the dedupd container's entrypoint reads it
# (DEDUPD_ZONE_FILE) and passes it as --zone.
#
# The container's environment:
#   NODE_NAME   the node the pod runs on (spec.nodeName)
#   ZONE_LABEL  the node label that names its zone (zone.nodeLabel)
#   ZONE_FILE   the file to write, on an emptyDir shared with dedupd
#   TIMEOUT     seconds the lookup may retry an API server that refuses or
#               does not answer (zone.lookup.timeoutSeconds)
#   KUBECTL     kubectl's path
#
# kubectl finds the API server and its credentials in the pod: the token of
# a ServiceAccount that may only `get` nodes, mounted into this container
# alone.
#
# It never fails the pod. When the node has no such label, when its value
# is not a zone dedupd accepts (letters, digits, '.', '_' and '-', at most
# 63), or when the API server has not answered within TIMEOUT seconds, it
# says why and leaves the file empty, and dedupd starts without a zone: it
# then counts as one zone with every other node that gives none.

say() { echo "zone-lookup: $*"; }

if ! { true >"$ZONE_FILE"; } 2>/dev/null; then
  say "cannot write $ZONE_FILE; dedupd starts without a zone"
  exit 0
fi
errors="$ZONE_FILE.err"
if [ -z "${NODE_NAME:-}" ]; then
  say "NODE_NAME is empty; dedupd starts without a zone"
  exit 0
fi
if ! command -v "${KUBECTL:-kubectl}" >/dev/null 2>&1; then
  say "no ${KUBECTL:-kubectl} in this image (zone.lookup.image needs /bin/sh and kubectl);" \
    "dedupd starts without a zone"
  exit 0
fi

# kubectl's JSONPath takes a dot inside a key as a separator unless escaped.
key="$(printf '%s' "$ZONE_LABEL" | sed 's/\./\\./g')"
deadline=$(($(date +%s) + ${TIMEOUT:-30}))
zone=""
found=""
while :; do
  if zone="$("${KUBECTL:-kubectl}" get node "$NODE_NAME" --request-timeout=10s \
    -o "jsonpath={.metadata.labels.$key}" 2>"$errors")"; then
    found=1
    break
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    break
  fi
  say "cannot read node '$NODE_NAME' yet: $(tail -n 1 "$errors"); retrying in 2s"
  sleep 2
done

if [ -z "$found" ]; then
  say "cannot read node '$NODE_NAME' within ${TIMEOUT:-30}s: $(tail -n 1 "$errors");" \
    "dedupd starts without a zone"
  zone=""
elif [ -z "$zone" ]; then
  say "node '$NODE_NAME' has no label $ZONE_LABEL; dedupd starts without a zone"
else
  case "$zone" in
    *[!A-Za-z0-9._-]*) valid="" ;;
    *) valid=1 ;;
  esac
  if [ -z "$valid" ] || [ "${#zone}" -gt 63 ]; then
    say "node '$NODE_NAME' has $ZONE_LABEL='$zone', which is not a zone (letters, digits," \
      "'.', '_' and '-', at most 63); dedupd starts without a zone"
    zone=""
  else
    say "node '$NODE_NAME' is in zone $zone ($ZONE_LABEL)"
  fi
fi
rm -f "$errors"
printf '%s\n' "$zone" >"$ZONE_FILE" || say "cannot write $ZONE_FILE; dedupd starts without a zone"
exit 0
