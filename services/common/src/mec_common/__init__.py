"""Shared library of the MEC transport suite.

Config, logging, REST conventions, auth, AMQP, the RNIS feed schema, the Mp1 client and the
3GPP tables.
"""
