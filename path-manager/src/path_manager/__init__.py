"""Predictive multipath path manager over Linux MPTCP"""
