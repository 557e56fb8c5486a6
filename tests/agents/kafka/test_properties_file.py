"""Reading and patching Kafka clients' `.properties` files in place (`agents.kafka.properties_file`)."""

from agents.kafka.properties_file import entries, patch, read

OPERATOR = """\
# Consumer of the web tier (managed by Puppet)
bootstrap.servers=k1:9093,k2:9093
security.protocol = SASL_SSL
sasl.mechanism: SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="web" \\
    password="s3cr=t";
! fetch tuning
fetch.min.bytes    1
fetch.max.wait.ms=500
ssl.ca.location=/etc/kafka/ca.pem"""


def test_every_separator_comment_and_continuation_is_read_as_java_reads_it():
    values = read(OPERATOR)
    assert values["security.protocol"] == "SASL_SSL" and values["sasl.mechanism"] == "SCRAM-SHA-512"
    assert values["fetch.min.bytes"] == "1"
    assert values["sasl.jaas.config"].endswith('username="web" password="s3cr=t";')
    assert [e.line for e in entries(OPERATOR)][-3:] == [9, 10, 11]


def test_a_patch_rewrites_only_the_tuned_values_and_keeps_every_other_byte():
    patched = patch(OPERATOR, {"fetch.max.wait.ms": "50", "fetch.min.bytes": "1024"})
    before, after = OPERATOR.splitlines(), patched.splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert changed == [("fetch.min.bytes    1", "fetch.min.bytes    1024"), ("fetch.max.wait.ms=500", "fetch.max.wait.ms=50")]
    assert len(before) == len(after) and read(patched)["fetch.max.wait.ms"] == "50"


def test_an_absent_key_is_appended_and_a_value_in_force_is_left_alone():
    patched = patch(OPERATOR, {"fetch.max.wait.ms": "500", "client.rack": "eu-1a"})
    assert patched == OPERATOR + "\nclient.rack=eu-1a\n"


def test_a_continued_value_is_replaced_whole():
    patched = patch(OPERATOR, {"sasl.jaas.config": "x required;"})
    assert read(patched)["sasl.jaas.config"] == "x required;" and "password" not in patched
    assert patched.splitlines()[-1] == "ssl.ca.location=/etc/kafka/ca.pem"


def test_the_last_of_a_key_given_twice_is_the_one_in_force_and_the_one_patched():
    text = "linger.ms=5\nacks=all\nlinger.ms=10\n"
    assert read(text)["linger.ms"] == "10"
    assert patch(text, {"linger.ms": "0"}) == "linger.ms=5\nacks=all\nlinger.ms=0\n"
