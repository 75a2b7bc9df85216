//! What one run measured, scenario by scenario, for the report and the targets table.

use crate::b1::B1;
use crate::b2::Contention;
use crate::b3::B3;
use crate::b5::Renewals;
use crate::b6::B6;
use crate::scenarios::{Cycles, Row};

/// Everything measured; a scenario that was not run is `None`.
pub(crate) struct Results {
    pub(crate) b1: Option<Result<B1, String>>,
    pub(crate) b2: Option<Vec<Row<Vec<Contention>>>>,
    pub(crate) b3: Option<Result<B3, String>>,
    pub(crate) b4: Option<Vec<Row<Vec<Cycles>>>>,
    pub(crate) b5: Option<Vec<Row<Vec<Renewals>>>>,
    pub(crate) b6: Option<B6>,
}
