#!/usr/bin/env bash
# Apache Kafka, three nodes in KRaft mode (each a broker and a controller), on loopback, from the jars
# of kafka.sh (docs/operations.md). Topics default to replication factor 3 and min.insync.replicas=2:
# with the relay's producer (acks=all, idempotent) an event is acknowledged once two brokers have it,
# so losing any one broker loses nothing. Prints the bootstrap list.
#
#   kafka-cluster.sh            start the three (made on first use; a running node is reused)
#   kafka-cluster.sh stop       stop the three
#   kafka-cluster.sh kill N     SIGKILL node N (1..3)
#   kafka-cluster.sh start N    start node N again (it catches up and rejoins the in-sync replicas)
#   kafka-cluster.sh format     only make the three nodes' storage (start does it when missing)
#
# Every JVM here, the storage tool's too, is given kafka.logs.dir (a folder under the cache): the
# log4j config (scripts/kafka/log4j2.properties) writes there, and without it log4j made a folder
# literally named `${sys:kafka.logs.dir}` in the working directory (the checkout's root).
#
# Ports: BILLING_KAFKA_CLUSTER_PORTS, the three brokers' (default 30520,30521,30522), and
# BILLING_KAFKA_CLUSTER_CONTROLLER_PORTS, the three controllers' (default 30530,30531,30532).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
IFS=, read -r -a PORTS <<< "${BILLING_KAFKA_CLUSTER_PORTS:-30520,30521,30522}"
IFS=, read -r -a CPORTS <<< "${BILLING_KAFKA_CLUSTER_CONTROLLER_PORTS:-30530,30531,30532}"
DIR="$CACHE/kafka-cluster"
LIBS="${BILLING_KAFKA_LIBS:-$CACHE/kafka/libs}"
BOOT="127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]}"
VOTERS="1@127.0.0.1:${CPORTS[0]},2@127.0.0.1:${CPORTS[1]},3@127.0.0.1:${CPORTS[2]}"

stop_node() {
  local n=$1 sig=${2:-TERM} pid
  [ -f "$DIR/node$n.pid" ] || return 0
  pid=$(cat "$DIR/node$n.pid")
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$DIR/node$n.pid"
}

case "${1:-}" in
  stop) for n in 1 2 3; do stop_node "$n" & done; wait; exit 0 ;;
  kill) stop_node "${2:?node 1..3}" KILL; exit 0 ;;
esac
if [ -n "${BILLING_TEST_KAFKA_CLUSTER_BOOTSTRAP:-}" ]; then echo "$BILLING_TEST_KAFKA_CLUSTER_BOOTSTRAP"; exit 0; fi

# The jars: kafka.sh fetches them (and, given no broker to start here, only that).
if [ ! -f "$LIBS/.complete" ]; then
  log "the Kafka jars are missing ($LIBS): run scripts/services/kafka.sh first"; exit 1
fi
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
CP="$LIBS/*"
# Smaller heaps than the single broker's (three JVMs on one small machine), same G1 settings.
JOPTS=(-Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
       -XX:+ExplicitGCInvokesConcurrent -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
       -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties")
mkdir -p "$DIR"
[ -f "$DIR/cluster.id" ] || "$JAVA" -cp "$CP" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 > "$DIR/cluster.id"

write_conf() {
  local n=$1 port=${PORTS[$1 - 1]} cport=${CPORTS[$1 - 1]} conf="$DIR/node$1.properties"
  cat > "$conf" <<PROPS
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data$n
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
replica.lag.time.max.ms=10000
# A broker that stops heartbeating is fenced (and its partitions get new leaders) after 4 s rather
# than the default 9 s; heartbeats every second.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000
log.retention.hours=24
log.segment.bytes=104857600
PROPS
}

# format_node N: node N's storage, unless it has it.
format_node() {
  local n=$1
  mkdir -p "$DIR/logs$n"
  if [ ! -f "$DIR/data$n/meta.properties" ]; then
    "$JAVA" "${JOPTS[@]}" -Dkafka.logs.dir="$DIR/logs$n" -cp "$CP" kafka.tools.StorageTool format \
      -t "$(cat "$DIR/cluster.id")" -c "$DIR/node$n.properties" >/dev/null
  fi
}

start_node() {
  local n=$1
  if port_open 127.0.0.1 "${PORTS[$n - 1]}"; then return 0; fi
  write_conf "$n"
  format_node "$n"
  nohup "$JAVA" "${JOPTS[@]}" -Dkafka.logs.dir="$DIR/logs$n" -cp "$CP" kafka.Kafka "$DIR/node$n.properties" \
    > "$DIR/logs$n/stdout.log" 2>&1 &
  echo $! > "$DIR/node$n.pid"
}

if [ "${1:-}" = "format" ]; then
  for n in 1 2 3; do write_conf "$n"; format_node "$n"; done
  exit 0
fi

if [ "${1:-}" = "start" ] && [ -n "${2:-}" ]; then
  start_node "$2"
  wait_port 127.0.0.1 "${PORTS[$2 - 1]}" 120 || { log "kafka node $2 did not open its port"; exit 1; }
  echo "$BOOT"; exit 0
fi
for n in 1 2 3; do start_node "$n"; done
for n in 1 2 3; do
  if ! wait_port 127.0.0.1 "${PORTS[n - 1]}" 150; then
    log "kafka node $n did not open ${PORTS[n - 1]}"; tail -30 "$DIR/logs$n/stdout.log" >&2 || true; exit 1
  fi
done
echo "$BOOT"
