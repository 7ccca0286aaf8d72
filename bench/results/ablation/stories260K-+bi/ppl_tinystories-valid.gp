set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+bi/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.45454867065942
20 11.287016191621968
30 29.106015064925977
40 75.01007910538895
e
