"""SIGMA's bed and experiment (issue 15): uploads from UE namespaces through the emulated
uplink MAC, with the emulator's grant feed writing SIGMA's map."""
