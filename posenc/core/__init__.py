"""The core: errors, limits, validation, the row-block engine, the data model of endpoint kinds, devices, angles, the wire codec and the plots."""
