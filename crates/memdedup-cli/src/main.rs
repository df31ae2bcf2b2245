//! The memdedup command.
fn main() {}
