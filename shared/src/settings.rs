//! Every environment variable the library, the example functions and the
//! CLI understand, defined, validated and documented in one place.
