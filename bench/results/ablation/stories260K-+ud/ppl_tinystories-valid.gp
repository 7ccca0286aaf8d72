set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+ud/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.239066043022
20 9.196887001360308
30 17.89259670666831
40 34.06755632950345
e
