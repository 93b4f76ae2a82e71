require "vacation";
vacation :days 3 :subject "Out of office" "I am away until Monday.";
