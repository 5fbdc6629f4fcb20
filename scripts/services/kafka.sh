#!/usr/bin/env bash
# Apache Kafka, single node in KRaft mode, on loopback. The broker's jars come from Maven Central
# through scripts/kafka/pom.xml; it runs on the installed Java 17. Prints the bootstrap address;
# reuses a running broker; `stop` stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BILLING_KAFKA_PORT:-29092}"
CPORT="${BILLING_KAFKA_CONTROLLER_PORT:-29093}"
DIR="$CACHE/kafka"
LIBS="${BILLING_KAFKA_LIBS:-$DIR/libs}"
BOOT="127.0.0.1:$PORT"

stop() {
  if [ -f "$DIR/kafka.pid" ]; then
    local pid; pid=$(cat "$DIR/kafka.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$DIR/kafka.pid"
  fi
}
if [ "${1:-}" = "stop" ]; then stop; exit 0; fi
if [ -n "${BILLING_TEST_KAFKA_BOOTSTRAP:-}" ]; then echo "$BILLING_TEST_KAFKA_BOOTSTRAP"; exit 0; fi

mkdir -p "$DIR"
if [ ! -f "$LIBS/.complete" ] || [ "$ROOT/scripts/kafka/pom.xml" -nt "$LIBS/.complete" ]; then
  command -v mvn >/dev/null || apt_ensure mvn maven
  log "fetching the Kafka broker's jars with mvn"
  rm -rf "$LIBS"
  mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
  touch "$LIBS/.complete"
fi

if port_open 127.0.0.1 "$PORT"; then echo "$BOOT"; exit 0; fi

JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
CP="$LIBS/*"
CONF="$DIR/server.properties"
cat > "$CONF" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
log.segment.bytes=104857600
PROPS
# The JVM options of Kafka's own start script (kafka-run-class.sh, KAFKA_JVM_PERFORMANCE_OPTS): G1 with
# a 20 ms pause goal. Without it G1 aims at 200 ms, grows the young generation to match, and each
# collection stalled the broker 55 ms on average on a shared 2-CPU host (jstat; bench/relay reports
# the pauses of each run): one or two of them in a run were the p99 of the relay's latency.
JOPTS=(-Xms512m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
       -XX:+ExplicitGCInvokesConcurrent -Dkafka.logs.dir="$DIR/logs"
       -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" -Djava.awt.headless=true)
mkdir -p "$DIR/logs"
if [ ! -f "$DIR/data/meta.properties" ]; then
  log "formatting KRaft storage"
  "$JAVA" "${JOPTS[@]}" -cp "$CP" kafka.tools.StorageTool format \
      -t "$("$JAVA" -cp "$CP" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)" -c "$CONF" >/dev/null
fi
nohup "$JAVA" "${JOPTS[@]}" -cp "$CP" kafka.Kafka "$CONF" > "$DIR/logs/stdout.log" 2>&1 &
echo $! > "$DIR/kafka.pid"
if ! wait_port 127.0.0.1 "$PORT" 90; then
  log "kafka did not open $PORT"; tail -30 "$DIR/logs/stdout.log" "$DIR/logs/server.log" >&2 || true; exit 1
fi
echo "$BOOT"
