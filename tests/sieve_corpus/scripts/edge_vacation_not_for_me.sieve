require ["vacation"];
vacation :addresses ["someone@else.example"] "Not me.";
