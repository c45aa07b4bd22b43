# services/common: the shared library mec_common.
TEST_TARGETS += test-common

.PHONY: test-common
test-common: python rabbitmq ## tests of mec_common (3GPP tables, schema, AMQP on a real RabbitMQ)
	uv run pytest -q services/common/tests
