//! No code: this crate's dependencies give every debug build of the
//! workspace the same feature set per dependency, so each is compiled once
//! (`scripts/workspace-hack.py` explains and regenerates it).
