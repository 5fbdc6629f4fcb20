#!/usr/bin/env bash
# Kafka (KRaft, one node) with SASL/SCRAM-SHA-512 on the client listener: the broker's own user and
# the `billing` user get the password of /run/secrets/kafka_password at format time.
set -euo pipefail
PW=$(cat /run/secrets/kafka_password)
CONF=/tmp/server.properties
cat > "$CONF" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=SASL_PLAINTEXT://:9092,CONTROLLER://localhost:9093
advertised.listeners=SASL_PLAINTEXT://kafka:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="billing" password="$PW";
allow.everyone.if.no.acl.found=false
# ANONYMOUS: the broker talking to its own controller over the loopback-only CONTROLLER listener.
super.users=User:billing;User:ANONYMOUS
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
num.partitions=4
PROPS
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  /opt/kafka/bin/kafka-storage.sh format -t "$(/opt/kafka/bin/kafka-storage.sh random-uuid)" -c "$CONF" \
    --add-scram "SCRAM-SHA-512=[name=billing,password=$PW]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$CONF"
