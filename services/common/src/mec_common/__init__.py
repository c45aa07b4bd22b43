"""Shared library of the MEC transport suite: config, logging, RNIS schema, AMQP, Mp1 client, 3GPP tables"""
