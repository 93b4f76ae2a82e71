require ["date", "relational", "fileinto", "variables"];
if date :originalzone "date" "year" "2020" { fileinto "Year2020"; }
if date :zone "+0000" "date" "date" "2021-01-01" { fileinto "NewYearUTC"; }
if date :originalzone "date" "hour" "23" { fileinto "LateLocal"; }
if date :value "ge" :originalzone "date" "month" "07" { fileinto "SecondHalf"; }
if date :zone "-0500" "date" "weekday" "5" { fileinto "FridayEST"; }
if date :matches :zone "+0000" "date" "iso8601" "*" { fileinto "ISO/${1}"; }
if date :matches :originalzone "date" "std11" "*" { set "s" "${1}"; fileinto "STD/${s}"; }
if date :originalzone "date" "zone" ["+0100", "+0200", "-0700", "-0500", "+0000", "-1000"] { fileinto "ZoneKnown"; }
if date :matches :zone "+0000" "date" "julian" "*" { fileinto "Julian/${1}"; }
if date :originalzone "date" "time" "09:59:58" { fileinto "Time"; }
