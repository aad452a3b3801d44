//! The calendar of PromQL's time functions (`hour`, `day_of_week`,
//! `days_in_month`, ...): Unix seconds to UTC civil dates
//! (`model::civil_from_days`; no time zone, as Prometheus).

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// The named calendar field of Unix time `secs` (UTC).
pub(crate) fn field(name: &str, secs: f64) -> f64 {
    let s = secs.floor() as i64;
    let days = s.div_euclid(86_400);
    let in_day = s.rem_euclid(86_400);
    let (y, m, d) = model::civil_from_days(days);
    let month_days = [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    match name {
        "minute" => ((in_day / 60) % 60) as f64,
        "hour" => (in_day / 3600) as f64,
        "day_of_month" => d as f64,
        "day_of_week" => ((days + 4).rem_euclid(7)) as f64,
        "day_of_year" => (month_days[..(m - 1) as usize].iter().sum::<i64>() + d) as f64,
        "days_in_month" => month_days[(m - 1) as usize] as f64,
        "month" => m as f64,
        "year" => y as f64,
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn calendar_fields_match_known_dates() {
        // 2024-02-29T13:45:00Z, a Thursday, day 60 of a leap year.
        let t = 1_709_214_300.0;
        let got: Vec<f64> =
            ["minute", "hour", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "month", "year"]
                .iter()
                .map(|f| field(f, t))
                .collect();
        assert_eq!(got, [45.0, 13.0, 29.0, 4.0, 60.0, 29.0, 2.0, 2024.0]);
        assert_eq!(field("year", 0.0), 1970.0);
        assert_eq!(field("day_of_week", 0.0), 4.0);
        assert_eq!(field("year", -1.0), 1969.0);
    }
}
