//! Staying up: issue 42's hostile requests (`hostile`, also sent by
//! `hostile_e2e`) and the soak that sends them beside an agent's steady load
//! (`soak`).

pub mod hostile;
pub mod soak;
