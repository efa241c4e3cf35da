//! A discrete-event model of SW-Pri at line rate: a sending host whose tasks run
//! the module's own SW-Pri code (`lite_kernel_logic::sw_pri` over the pacer
//! files), its RNIC, and a switch with a lossless queue in front of a 25 or
//! 100 Gbit/s link, on the nexosim engine. Method, model and results:
//! docs/measurements/simulation.md. Everything it reports is simulated.

pub mod host;
pub mod net;
pub mod record;
pub mod report;
pub mod run;
pub mod scenario;
pub mod sets;
