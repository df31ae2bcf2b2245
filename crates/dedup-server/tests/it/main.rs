//! Integration tests of the HTTP service over real loopback HTTP.
