require ["vacation", "vacation-seconds"];
vacation :seconds 3600 :subject "Brb" "Back in an hour.";
