require ["vacation"];
vacation :days 0 :subject "zero" "Zero days.";
